// SPDX-License-Identifier: Apache-2.0
#include "npy.h"

#include <cctype>
#include <cstring>

namespace rlpayload {

std::string npyHeader(const std::string& descr, uint64_t count) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(count) + ",), }";
  const size_t prefix = 10;  // magic (6) + version (2) + header length (2)
  size_t total = prefix + dict.size() + 1;
  const size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t length = static_cast<uint16_t>(dict.size());
  out += static_cast<char>(length & 0xff);
  out += static_cast<char>(length >> 8);
  return out + dict;
}

size_t npyItemSize(const std::string& d) {
  // '<' little-endian, '|' not applicable (one byte), '=' native (little-endian here): f2 f4 f8, i/u 1 2 4 8.
  if (d.size() != 3 || (d[0] != '<' && d[0] != '|' && d[0] != '=')) return 0;
  if (d[1] != 'f' && d[1] != 'i' && d[1] != 'u') return 0;
  const size_t size = static_cast<size_t>(d[2] - '0');
  if (size != 1 && size != 2 && size != 4 && size != 8) return 0;
  if (d[1] == 'f' && size == 1) return 0;
  if (size > 1 && d[0] == '|') return 0;
  return size;
}

namespace {

// A tiny reader for the header dict numpy writes: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
struct DictParser {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool str(std::string* out) {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return false;
    const char q = s[i++];
    const size_t end = s.find(q, i);
    if (end == std::string::npos) return false;
    *out = s.substr(i, end - i);
    i = end + 1;
    return true;
  }
  bool word(std::string* out) {
    ws();
    size_t start = i;
    while (i < s.size() && std::isalnum(static_cast<unsigned char>(s[i]))) ++i;
    *out = s.substr(start, i - start);
    return !out->empty();
  }
};

// Where the header dict is: after the magic, the version and the header length (2 bytes in version 1, 4 after).
bool locateHeader(const std::vector<uint8_t>& image, size_t* headerStart, size_t* headerLength, std::string* reason) {
  if (image.size() < 10 || memcmp(image.data(), "\x93NUMPY", 6) != 0) {
    *reason = "not a .npy file (bad magic)";
    return false;
  }
  const int major = image[6];
  if (major == 1) {
    *headerLength = image[8] | (static_cast<size_t>(image[9]) << 8);
    *headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (image.size() < 12) {
      *reason = "truncated .npy header";
      return false;
    }
    *headerLength = image[8] | (static_cast<size_t>(image[9]) << 8) | (static_cast<size_t>(image[10]) << 16) |
                    (static_cast<size_t>(image[11]) << 24);
    *headerStart = 12;
  } else {
    *reason = "unsupported .npy version " + std::to_string(major) + "." + std::to_string(image[7]);
    return false;
  }
  if (*headerLength > image.size() - *headerStart) {
    *reason = "truncated .npy header";
    return false;
  }
  return true;
}

// The shape tuple "(2, 3)" into `a`'s shape and element count (bounded, so that count * item size cannot overflow).
bool parseShape(DictParser& p, NpyArray* a, std::string* reason) {
  if (!p.eat('(')) {
    *reason = "malformed shape in .npy header";
    return false;
  }
  a->count = 1;
  while (!p.eat(')')) {
    std::string w;
    if (!p.word(&w) || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 18) {
      *reason = "malformed shape in .npy header";
      return false;
    }
    const uint64_t dim = std::stoull(w);
    a->shape.push_back(dim);
    if (dim != 0 && a->count > (1ull << 62) / dim) {
      *reason = "shape too large";
      return false;
    }
    a->count *= dim;
    p.eat(',');
  }
  return true;
}

// The header dict: descr, fortran_order and shape, each at most once, nothing else.
bool parseHeaderDict(const std::string& header, NpyArray* a, std::string* reason) {
  DictParser p{header};
  bool haveDescr = false, haveShape = false, haveOrder = false;
  if (!p.eat('{')) {
    *reason = "malformed .npy header (no dict)";
    return false;
  }
  while (!p.eat('}')) {
    std::string key;
    if (!p.str(&key) || !p.eat(':')) {
      *reason = "malformed .npy header";
      return false;
    }
    // A key given twice would leave its value ambiguous (a second shape added its dimensions to the first's).
    if ((key == "descr" && haveDescr) || (key == "shape" && haveShape) || (key == "fortran_order" && haveOrder)) {
      *reason = "duplicate key '" + key + "' in .npy header";
      return false;
    }
    if (key == "descr") {
      if (!p.str(&a->descr)) {
        *reason = "unsupported .npy descr (structured dtypes are not supported)";
        return false;
      }
      haveDescr = true;
    } else if (key == "fortran_order") {
      std::string w;
      if (!p.word(&w) || (w != "True" && w != "False")) {
        *reason = "malformed fortran_order in .npy header";
        return false;
      }
      a->fortranOrder = w == "True";
      haveOrder = true;
    } else if (key == "shape") {
      if (!parseShape(p, a, reason)) return false;
      haveShape = true;
    } else {
      *reason = "unknown key '" + key + "' in .npy header";
      return false;
    }
    p.eat(',');
  }
  if (!haveDescr || !haveShape) {
    *reason = "the .npy header lacks descr or shape";
    return false;
  }
  return true;
}

}  // namespace

bool parseNpy(const std::vector<uint8_t>& image, NpyArray* out, std::string* reason) {
  size_t headerStart = 0, headerLength = 0;
  if (!locateHeader(image, &headerStart, &headerLength, reason)) return false;
  const std::string header(reinterpret_cast<const char*>(image.data() + headerStart), headerLength);
  NpyArray a;
  if (!parseHeaderDict(header, &a, reason)) return false;
  const size_t item = npyItemSize(a.descr);
  if (item == 0) {
    *reason = "unsupported .npy dtype '" + a.descr + "' (little-endian integers and floats only)";
    return false;
  }
  const size_t dataStart = headerStart + headerLength;
  const uint64_t dataBytes = image.size() - dataStart;
  if (a.count > dataBytes / item || a.count * item != dataBytes) {
    *reason = "the .npy data is " + std::to_string(dataBytes) + " bytes, the shape needs " + std::to_string(a.count) +
              " x " + std::to_string(item);
    return false;
  }
  a.data.assign(image.begin() + static_cast<std::ptrdiff_t>(dataStart), image.end());
  *out = std::move(a);
  return true;
}

}  // namespace rlpayload
