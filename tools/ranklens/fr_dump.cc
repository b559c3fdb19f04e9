// SPDX-License-Identifier: Apache-2.0
#include "fr_dump.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace ranklens {
namespace fr {

const Value* Value::get(const std::string& key) const {
  if (kind != Kind::kDict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {  // a repeated key: the last write wins, as in Python
    if (it->first->kind == Kind::kStr && it->first->s == key) return it->second;
  }
  return nullptr;
}

namespace {

// ------------------------------------------------------------------------------------------------- pickle reader

// Opcode names for the refusal messages (the ones that import or call, and a few others never written by torch).
const char* refusedOpcodeName(uint8_t op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 0x96:
      return "BYTEARRAY8";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    default:
      return nullptr;
  }
}

// torch.jit._pickle's helpers that torch's C++ pickler wraps around plain lists and dicts. Recognised by name; their
// result is built here (the list itself, the tagged object itself). Nothing is imported or called.
enum class Helper { kNone, kList, kTypeTag };
Helper allowedGlobal(const std::string& module, const std::string& name) {
  if (module != "torch.jit._pickle") return Helper::kNone;
  if (name == "build_intlist" || name == "build_doublelist" || name == "build_boollist") return Helper::kList;
  if (name == "restore_type_tag") return Helper::kTypeTag;
  return Helper::kNone;
}

class PickleReader {
 public:
  PickleReader(const uint8_t* data, size_t size, const std::string& name, const Limits& limits, Pickle* out)
      : p_(data), size_(size), name_(name), limits_(limits), out_(out) {}

  bool run(std::string* error) {
    if (!loop()) {
      *error = name_ + ": offset " + std::to_string(errorAt_) + ": " + error_;
      return false;
    }
    return true;
  }

 private:
  struct Slot {
    Value* v = nullptr;
    Helper helper = Helper::kNone;  // a recognised global, waiting for REDUCE
  };

  bool fail(size_t at, const std::string& why) {
    errorAt_ = at;
    error_ = why;
    return false;
  }
  bool need(size_t n) { return size_ - pos_ >= n; }
  Value* make(Value::Kind kind) {
    if (out_->arena.size() >= limits_.maxValues) return nullptr;
    out_->arena.push_back(std::make_unique<Value>());
    out_->arena.back()->kind = kind;
    return out_->arena.back().get();
  }
  uint64_t le(size_t n) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(p_[pos_ + k]) << (8 * k);
    pos_ += n;
    return v;
  }
  bool push(Value* v, size_t at) {
    if (v == nullptr) return fail(at, "more than " + std::to_string(limits_.maxValues) + " values (limit)");
    if (stack_.size() + marks_.size() >= limits_.maxStack) return fail(at, "stack deeper than the limit");
    stack_.push_back(Slot{v, Helper::kNone});
    return true;
  }
  bool pop(Slot* s, size_t at, const char* op) {
    if (stack_.size() <= floor()) return fail(at, std::string(op) + " on an empty stack");
    *s = stack_.back();
    stack_.pop_back();
    return true;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  bool popMark(size_t at, const char* op, std::vector<Slot>* items) {
    if (marks_.empty()) return fail(at, std::string(op) + " without a MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    items->assign(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return true;
  }
  bool plain(const Slot& s, size_t at, const char* op) {
    if (s.helper != Helper::kNone) return fail(at, std::string(op) + " of a global that was not called");
    return true;
  }
  bool text(size_t at, size_t n, Value::Kind kind) {
    if (n > limits_.maxStringBytes || !need(n))
      return fail(at, "string of " + std::to_string(n) + " bytes past the end");
    strings_ += n;
    if (strings_ > limits_.maxStringBytes) return fail(at, "more string bytes than the limit");
    Value* v = make(kind);
    if (v != nullptr) v->s.assign(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return push(v, at);
  }
  bool line(size_t at, std::string* s) {
    const void* nl = std::memchr(p_ + pos_, '\n', size_ - pos_);
    if (nl == nullptr) return fail(at, "text argument without its newline");
    const size_t end = static_cast<const uint8_t*>(nl) - p_;
    s->assign(reinterpret_cast<const char*>(p_ + pos_), end - pos_);
    pos_ = end + 1;
    return true;
  }
  bool memoPut(uint64_t id, size_t at) {
    if (stack_.size() <= floor()) return fail(at, "memo store of an empty stack");
    if (memo_.size() >= limits_.maxValues) return fail(at, "memo larger than the limit");
    memo_[id] = stack_.back();  // torch's pickler memoizes its globals too
    return true;
  }
  bool memoGet(uint64_t id, size_t at) {
    auto it = memo_.find(id);
    if (it == memo_.end()) return fail(at, "memo " + std::to_string(id) + " read before it was stored");
    if (it->second.helper != Helper::kNone) {
      if (stack_.size() + marks_.size() >= limits_.maxStack) return fail(at, "stack deeper than the limit");
      stack_.push_back(it->second);
      return true;
    }
    return push(it->second.v, at);
  }
  bool appendTo(Value* list, const std::vector<Slot>& items, size_t at) {
    if (list->kind != Value::Kind::kList) return fail(at, "APPEND to something that is not a list");
    for (const Slot& s : items) {
      if (!plain(s, at, "APPEND")) return false;
      list->items.push_back(s.v);
    }
    return true;
  }
  bool setItems(Value* dict, const std::vector<Slot>& kv, size_t at) {
    if (dict->kind != Value::Kind::kDict) return fail(at, "SETITEM on something that is not a dict");
    if (kv.size() % 2 != 0) return fail(at, "SETITEMS with an odd number of items");
    for (size_t k = 0; k < kv.size(); k += 2) {
      if (!plain(kv[k], at, "SETITEM") || !plain(kv[k + 1], at, "SETITEM")) return false;
      dict->entries.emplace_back(kv[k].v, kv[k + 1].v);
    }
    return true;
  }
  bool global(size_t at, const std::string& module, const std::string& name) {
    const Helper h = allowedGlobal(module, name);
    if (h == Helper::kNone) {
      return fail(at, "the pickle imports " + module + "." + name +
                          ": a Flight Recorder dump holds plain data only, and RankLens never runs code from a file "
                          "(this one is not a dump, or was altered)");
    }
    if (stack_.size() + marks_.size() >= limits_.maxStack) return fail(at, "stack deeper than the limit");
    stack_.push_back(Slot{nullptr, h});
    return true;
  }
  bool reduce(size_t at) {
    Slot args, fn;
    if (!pop(&args, at, "REDUCE") || !pop(&fn, at, "REDUCE")) return false;
    if (fn.helper == Helper::kNone) return fail(at, "REDUCE calls something that is not a known torch list helper");
    if (args.helper != Helper::kNone || args.v->kind != Value::Kind::kTuple || args.v->items.empty()) {
      return fail(at, "REDUCE of a torch helper without its argument tuple");
    }
    const Value* arg = args.v->items[0];
    if (fn.helper == Helper::kList && arg->kind != Value::Kind::kList) {
      return fail(at, "torch list helper applied to something that is not a list");
    }
    return push(const_cast<Value*>(arg), at);  // the arena owns every value; the reader builds in place
  }

  bool loop() {
    for (;;) {
      if (!need(1)) return fail(pos_, "the pickle ends without STOP (truncated)");
      const size_t at = pos_;
      const uint8_t op = p_[pos_++];
      switch (op) {
        case 0x80:  // PROTO
          if (!need(1)) return fail(at, "truncated PROTO");
          if (p_[pos_] > 5) return fail(at, "pickle protocol " + std::to_string(p_[pos_]) + " (this reader knows 0-5)");
          ++pos_;
          break;
        case 0x95:  // FRAME: a length hint only
          if (!need(8)) return fail(at, "truncated FRAME");
          pos_ += 8;
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty() || stack_[0].helper != Helper::kNone) {
            return fail(at, "STOP with " + std::to_string(stack_.size()) + " values on the stack (expected one)");
          }
          out_->root = stack_[0].v;
          return true;
        case '(':
          if (stack_.size() + marks_.size() >= limits_.maxStack) return fail(at, "stack deeper than the limit");
          marks_.push_back(stack_.size());
          break;
        case '}':
          if (!push(make(Value::Kind::kDict), at)) return false;
          break;
        case ']':
          if (!push(make(Value::Kind::kList), at)) return false;
          break;
        case 0x8f:
          if (!push(make(Value::Kind::kList), at)) return false;
          break;  // EMPTY_SET: read as a list
        case ')':
          if (!push(make(Value::Kind::kTuple), at)) return false;
          break;
        case 'N':
          if (!push(make(Value::Kind::kNone), at)) return false;
          break;
        case 0x88:
        case 0x89: {
          Value* v = make(Value::Kind::kBool);
          if (v != nullptr) v->b = op == 0x88;
          if (!push(v, at)) return false;
          break;
        }
        case 't':
        case 'l':
        case 0x91: {  // TUPLE, LIST, FROZENSET from the mark
          std::vector<Slot> items;
          if (!popMark(at, op == 't' ? "TUPLE" : "LIST", &items)) return false;
          Value* v = make(op == 't' ? Value::Kind::kTuple : Value::Kind::kList);
          if (v == nullptr) return push(v, at);
          for (const Slot& s : items) {
            if (!plain(s, at, "TUPLE")) return false;
            v->items.push_back(s.v);
          }
          if (!push(v, at)) return false;
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          if (stack_.size() < floor() + n) return fail(at, "TUPLE" + std::to_string(n) + " on too short a stack");
          Value* v = make(Value::Kind::kTuple);
          if (v == nullptr) return push(v, at);
          for (size_t k = stack_.size() - n; k < stack_.size(); ++k) {
            if (!plain(stack_[k], at, "TUPLE")) return false;
            v->items.push_back(stack_[k].v);
          }
          stack_.resize(stack_.size() - n);
          if (!push(v, at)) return false;
          break;
        }
        case 'd': {  // DICT from the mark
          std::vector<Slot> kv;
          if (!popMark(at, "DICT", &kv)) return false;
          Value* v = make(Value::Kind::kDict);
          if (v == nullptr) return push(v, at);
          if (!setItems(v, kv, at) || !push(v, at)) return false;
          break;
        }
        case 'a': {
          Slot item;
          if (!pop(&item, at, "APPEND")) return false;
          if (stack_.size() <= floor()) return fail(at, "APPEND without a list");
          if (!plain(stack_.back(), at, "APPEND") || !appendTo(stack_.back().v, {item}, at)) return false;
          break;
        }
        case 'e':
        case 0x90: {  // APPENDS, ADDITEMS
          std::vector<Slot> items;
          if (!popMark(at, "APPENDS", &items)) return false;
          if (stack_.size() <= floor()) return fail(at, "APPENDS without a list");
          if (!plain(stack_.back(), at, "APPENDS") || !appendTo(stack_.back().v, items, at)) return false;
          break;
        }
        case 's': {
          Slot v, k;
          if (!pop(&v, at, "SETITEM") || !pop(&k, at, "SETITEM")) return false;
          if (stack_.size() <= floor()) return fail(at, "SETITEM without a dict");
          if (!plain(stack_.back(), at, "SETITEM") || !setItems(stack_.back().v, {k, v}, at)) return false;
          break;
        }
        case 'u': {
          std::vector<Slot> kv;
          if (!popMark(at, "SETITEMS", &kv)) return false;
          if (stack_.size() <= floor()) return fail(at, "SETITEMS without a dict");
          if (!plain(stack_.back(), at, "SETITEMS") || !setItems(stack_.back().v, kv, at)) return false;
          break;
        }
        case 'J':
        case 'K':
        case 'M': {
          const size_t n = op == 'J' ? 4 : op == 'K' ? 1 : 2;
          if (!need(n)) return fail(at, "truncated integer");
          const uint64_t raw = le(n);
          Value* v = make(Value::Kind::kInt);
          if (v != nullptr) v->i = op == 'J' ? static_cast<int32_t>(raw) : static_cast<int64_t>(raw);
          if (!push(v, at)) return false;
          break;
        }
        case 0x8a:
        case 0x8b: {  // LONG1, LONG4: little-endian two's complement
          const size_t w = op == 0x8a ? 1 : 4;
          if (!need(w)) return fail(at, "truncated LONG");
          const uint64_t n = le(w);
          if (n > 8) return fail(at, "an integer of " + std::to_string(n) + " bytes (more than 64 bits)");
          if (!need(n)) return fail(at, "truncated LONG");
          uint64_t raw = le(n);
          if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t(0) << (8 * n);
          Value* v = make(Value::Kind::kInt);
          if (v != nullptr) v->i = static_cast<int64_t>(raw);
          if (!push(v, at)) return false;
          break;
        }
        case 'I':
        case 'L': {  // INT, LONG as text (protocol 0)
          std::string t;
          if (!line(at, &t)) return false;
          if (op == 'L' && !t.empty() && t.back() == 'L') t.pop_back();
          Value* v = make(Value::Kind::kInt);
          if (op == 'I' && (t == "00" || t == "01")) {
            if (v != nullptr) {
              v->kind = Value::Kind::kBool;
              v->b = t == "01";
            }
          } else {
            char* end = nullptr;
            errno = 0;
            const long long x = std::strtoll(t.c_str(), &end, 10);
            if (t.empty() || *end != '\0' || errno != 0) return fail(at, "malformed integer '" + t.substr(0, 32) + "'");
            if (v != nullptr) v->i = x;
          }
          if (!push(v, at)) return false;
          break;
        }
        case 'F': {
          std::string t;
          if (!line(at, &t)) return false;
          char* end = nullptr;
          const double x = std::strtod(t.c_str(), &end);
          if (t.empty() || *end != '\0') return fail(at, "malformed float '" + t.substr(0, 32) + "'");
          Value* v = make(Value::Kind::kFloat);
          if (v != nullptr) v->f = x;
          if (!push(v, at)) return false;
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          if (!need(8)) return fail(at, "truncated BINFLOAT");
          uint64_t raw = 0;
          for (int k = 0; k < 8; ++k) raw = (raw << 8) | p_[pos_ + k];
          pos_ += 8;
          double x;
          std::memcpy(&x, &raw, 8);
          Value* v = make(Value::Kind::kFloat);
          if (v != nullptr) v->f = x;
          if (!push(v, at)) return false;
          break;
        }
        case 'X':
        case 0x8c:
        case 0x8d:
        case 'T':
        case 'U':
        case 'B':
        case 'C':
        case 0x8e: {
          const size_t w = (op == 0x8c || op == 'U' || op == 'C') ? 1 : (op == 0x8d || op == 0x8e) ? 8 : 4;
          if (!need(w)) return fail(at, "truncated string length");
          const uint64_t n = le(w);
          const bool bytes = op == 'B' || op == 'C' || op == 0x8e;
          if (!text(at, n, bytes ? Value::Kind::kBytes : Value::Kind::kStr)) return false;
          break;
        }
        case 'q':
          if (!need(1)) return fail(at, "truncated BINPUT");
          if (!memoPut(le(1), at)) return false;
          break;
        case 'r':
          if (!need(4)) return fail(at, "truncated LONG_BINPUT");
          if (!memoPut(le(4), at)) return false;
          break;
        case 0x94:
          if (!memoPut(memo_.size(), at)) return false;
          break;  // MEMOIZE
        case 'h':
          if (!need(1)) return fail(at, "truncated BINGET");
          if (!memoGet(le(1), at)) return false;
          break;
        case 'j':
          if (!need(4)) return fail(at, "truncated LONG_BINGET");
          if (!memoGet(le(4), at)) return false;
          break;
        case 'p':
        case 'g': {  // PUT, GET as text
          std::string t;
          if (!line(at, &t)) return false;
          char* end = nullptr;
          const unsigned long long id = std::strtoull(t.c_str(), &end, 10);
          if (t.empty() || *end != '\0') return fail(at, "malformed memo index");
          if (!(op == 'p' ? memoPut(id, at) : memoGet(id, at))) return false;
          break;
        }
        case '0': {
          Slot s;
          if (!pop(&s, at, "POP")) return false;
          break;
        }
        case '1': {
          std::vector<Slot> items;
          if (!popMark(at, "POP_MARK", &items)) return false;
          break;
        }
        case '2':
          if (stack_.size() <= floor()) return fail(at, "DUP on an empty stack");
          if (!plain(stack_.back(), at, "DUP") || !push(stack_.back().v, at)) return false;
          break;
        case 'c': {  // GLOBAL "module\nname\n": torch's list helpers only
          std::string module, name;
          if (!line(at, &module) || !line(at, &name)) return false;
          if (!global(at, module, name)) return false;
          break;
        }
        case 0x93: {  // STACK_GLOBAL: the same from two strings on the stack
          Slot n, m;
          if (!pop(&n, at, "STACK_GLOBAL") || !pop(&m, at, "STACK_GLOBAL")) return false;
          if (n.v == nullptr || m.v == nullptr || !n.v->isStr() || !m.v->isStr()) {
            return fail(at, "STACK_GLOBAL without its module and name");
          }
          if (!global(at, m.v->s, n.v->s)) return false;
          break;
        }
        case 'R':
          if (!reduce(at)) return false;
          break;
        default: {
          const char* refused = refusedOpcodeName(op);
          if (refused != nullptr) {
            return fail(at, std::string("opcode ") + refused +
                                " would build or call an object: a Flight Recorder dump holds plain data only, and "
                                "RankLens never runs code from a file (this one is not a dump, or was altered)");
          }
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          return fail(at, std::string("unknown pickle opcode ") + hex + " (not a pickle, or damaged)");
        }
      }
    }
  }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
  const Limits& limits_;
  Pickle* out_;
  std::vector<Slot> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Slot> memo_;
  size_t strings_ = 0;
  size_t errorAt_ = 0;
  std::string error_;
};

// --------------------------------------------------------------------------------------------------- JSON reader

// torch's JSON dump, through nlohmann's SAX parser (iterative: no recursion to exhaust on hostile nesting) into the
// same Value tree as a pickle, so that one dump parser reads both; a dict keeps every key in order, as a pickle's.
class JsonBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  JsonBuilder(const Limits& limits, Pickle* out) : limits_(limits), out_(out) {}
  const std::string& error() const { return error_; }
  size_t errorAt() const { return errorAt_; }

  bool null() override { return add(make(Value::Kind::kNone)); }
  bool boolean(bool v) override {
    Value* x = make(Value::Kind::kBool);
    if (x) x->b = v;
    return add(x);
  }
  bool number_integer(number_integer_t v) override {
    Value* x = make(Value::Kind::kInt);
    if (x) x->i = v;
    return add(x);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<uint64_t>(INT64_MAX)) return number_float(static_cast<double>(v), "");
    return number_integer(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    Value* x = make(Value::Kind::kFloat);
    if (x) x->f = v;
    return add(x);
  }
  bool string(string_t& v) override {
    Value* x = text(v);
    return x != nullptr && add(x);
  }
  bool binary(binary_t&) override { return fail("binary value"); }
  bool start_object(std::size_t) override { return open(Value::Kind::kDict); }
  bool key(string_t& v) override {
    key_ = text(v);
    return key_ != nullptr;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Value::Kind::kList); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    errorAt_ = position;
    return fail(position >= total_ ? "the text ends where more was expected (truncated)" : e.what());
  }
  void setTotal(size_t n) { total_ = n; }

 private:
  bool fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  Value* make(Value::Kind k) {
    if (out_->arena.size() >= limits_.maxValues) {
      fail("more values than the limit");
      return nullptr;
    }
    out_->arena.push_back(std::make_unique<Value>());
    out_->arena.back()->kind = k;
    return out_->arena.back().get();
  }
  Value* text(const std::string& v) {
    if (v.size() > limits_.maxStringBytes) {
      fail("string longer than the limit");
      return nullptr;
    }
    Value* x = make(Value::Kind::kStr);
    if (x) x->s = v;
    return x;
  }
  // Places a finished value in the open container (after its key in a dict), or as the document.
  bool add(Value* v) {
    if (v == nullptr) return false;
    if (open_.empty()) {
      out_->root = v;
    } else if (open_.back()->kind == Value::Kind::kDict) {
      open_.back()->entries.emplace_back(key_, v);
    } else {
      open_.back()->items.push_back(v);
    }
    return true;
  }
  bool open(Value::Kind k) {
    if (open_.size() >= limits_.maxStack) return fail("nested deeper than the limit");
    Value* v = make(k);
    if (v == nullptr || !add(v)) return false;
    open_.push_back(v);
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  const Limits& limits_;
  Pickle* out_;
  std::vector<Value*> open_;
  const Value* key_ = nullptr;
  size_t total_ = 0;
  size_t errorAt_ = std::string::npos;  // known only for the parser's own errors, not for a limit
  std::string error_;
};

// ------------------------------------------------------------------------------------------------- dump parsing

const char* kindName(const Value* v) {
  if (v == nullptr) return "nothing";
  switch (v->kind) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "a bool";
    case Value::Kind::kInt:
      return "an int";
    case Value::Kind::kFloat:
      return "a float";
    case Value::Kind::kStr:
      return "a str";
    case Value::Kind::kBytes:
      return "bytes";
    case Value::Kind::kList:
      return "a list";
    case Value::Kind::kTuple:
      return "a tuple";
    case Value::Kind::kDict:
      return "a dict";
  }
  return "?";
}

struct Ctx {
  const std::string& file;
  std::string* error;
  bool bad(const std::string& key, const std::string& what, const Value* found) {
    *error = file + ": " + key + ": expected " + what + ", found " + kindName(found) +
             " (not a Flight Recorder dump, or damaged)";
    return false;
  }
  // The same, as the Status the dump's parser returns.
  Status corrupt(const std::string& key, const std::string& what, const Value* found) {
    bad(key, what, found);
    return Status::corrupt(*error);
  }
};

// An integer the JSON variant may write as a decimal string (pg_status).
bool asInt(const Value* v, int64_t* out) {
  if (v == nullptr) return false;
  if (v->isInt()) {
    *out = v->kind == Value::Kind::kBool ? v->b : v->i;
    return true;
  }
  if (v->kind == Value::Kind::kFloat && std::isfinite(v->f) && v->f == std::floor(v->f) && std::fabs(v->f) < 9e18) {
    *out = static_cast<int64_t>(v->f);
    return true;
  }
  if (v->isStr() && !v->s.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v->s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0) {
      *out = x;
      return true;
    }
  }
  return false;
}

bool optInt(Ctx& c, const Value* e, const std::string& where, const char* key, int64_t* out) {
  const Value* v = e->get(key);
  if (v == nullptr || v->kind == Value::Kind::kNone) return true;
  if (!asInt(v, out)) return c.bad(where + "." + key, "an int", v);
  return true;
}

bool sizes(Ctx& c, const Value* v, const std::string& where, std::vector<std::vector<int64_t>>* out) {
  if (v == nullptr) return true;
  if (!v->isSeq()) return c.bad(where, "a list of shapes", v);
  for (size_t k = 0; k < v->items.size(); ++k) {
    const Value* shape = v->items[k];
    if (!shape->isSeq()) return c.bad(where + "[" + std::to_string(k) + "]", "a shape (list of ints)", shape);
    std::vector<int64_t> dims;
    for (const Value* d : shape->items) {
      int64_t x;
      if (!asInt(d, &x) || x < 0) return c.bad(where + "[" + std::to_string(k) + "]", "non-negative ints", d);
      dims.push_back(x);
    }
    out->push_back(std::move(dims));
  }
  return true;
}

bool strings(Ctx& c, const Value* v, const std::string& where, std::vector<std::string>* out) {
  if (v == nullptr) return true;
  if (!v->isSeq()) return c.bad(where, "a list of dtype names", v);
  for (const Value* s : v->items) {
    if (!s->isStr()) return c.bad(where, "dtype names (str)", s);
    out->push_back(s->s);
  }
  return true;
}

bool parseEntry(Ctx& c, const Value* e, size_t index, Entry* out) {
  const std::string where = "entries[" + std::to_string(index) + "]";
  if (e->kind != Value::Kind::kDict) return c.bad(where, "a dict", e);
  const Value* name = e->get("profiling_name");
  if (name == nullptr || !name->isStr()) return c.bad(where + ".profiling_name", "a str", name);
  out->profilingName = name->s;
  const Value* state = e->get("state");
  if (state == nullptr || !state->isStr()) return c.bad(where + ".state", "a str", state);
  if (state->s != "scheduled" && state->s != "started" && state->s != "completed") {
    *c.error =
        c.file + ": " + where + ".state: '" + state->s.substr(0, 40) + "' (expected scheduled, started or completed)";
    return false;
  }
  out->state = state->s;
  if (!optInt(c, e, where, "record_id", &out->recordId) || !optInt(c, e, where, "pg_id", &out->pgId) ||
      !optInt(c, e, where, "collective_seq_id", &out->collectiveSeqId) ||
      !optInt(c, e, where, "p2p_seq_id", &out->p2pSeqId) || !optInt(c, e, where, "op_id", &out->opId) ||
      !optInt(c, e, where, "time_created_ns", &out->timeCreatedNs) ||
      !optInt(c, e, where, "timeout_ms", &out->timeoutMs)) {
    return false;
  }
  if (e->get("collective_seq_id") == nullptr) return c.bad(where + ".collective_seq_id", "an int", nullptr);
  const Value* pg = e->get("process_group");
  if (pg != nullptr) {
    if (!pg->isSeq() || pg->items.size() != 2 || !pg->items[0]->isStr() || !pg->items[1]->isStr()) {
      return c.bad(where + ".process_group", "(name, description)", pg);
    }
    out->pgName = pg->items[0]->s;
    out->pgDesc = pg->items[1]->s;
  } else if (out->pgId < 0) {
    return c.bad(where + ".process_group", "(name, description)", pg);
  } else {
    out->pgName = std::to_string(out->pgId);
  }
  if (!sizes(c, e->get("input_sizes"), where + ".input_sizes", &out->inputSizes) ||
      !sizes(c, e->get("output_sizes"), where + ".output_sizes", &out->outputSizes) ||
      !strings(c, e->get("input_dtypes"), where + ".input_dtypes", &out->inputDtypes) ||
      !strings(c, e->get("output_dtypes"), where + ".output_dtypes", &out->outputDtypes)) {
    return false;
  }
  if (const Value* d = e->get("duration_ms"); d != nullptr && d->kind != Value::Kind::kNone) {
    if (!d->isNumber()) return c.bad(where + ".duration_ms", "a number", d);
    out->durationMs = d->number();
  }
  // The JSON variant writes 0 for "not discovered"; the pickle None.
  for (auto [key, slot] :
       {std::pair<const char*, std::optional<int64_t>*>{"time_discovered_started_ns", &out->timeDiscoveredStartedNs},
        {"time_discovered_completed_ns", &out->timeDiscoveredCompletedNs}}) {
    const Value* t = e->get(key);
    if (t == nullptr || t->kind == Value::Kind::kNone) continue;
    int64_t x;
    if (!asInt(t, &x)) return c.bad(where + "." + key, "an int or None", t);
    if (x != 0) *slot = x;
  }
  if (const Value* r = e->get("retired"); r != nullptr && r->isInt()) out->retired = r->number() != 0;
  if (const Value* p = e->get("is_p2p"); p != nullptr && p->kind != Value::Kind::kNone) {
    if (!p->isInt()) return c.bad(where + ".is_p2p", "a bool", p);
    out->isP2p = p->number() != 0;
    out->isP2pKnown = out->isP2p;
  }
  if (const Value* t = e->get("thread_name"); t != nullptr && t->isStr()) out->threadName = t->s;
  if (const Value* t = e->get("thread_id"); t != nullptr && t->isStr()) out->threadId = t->s;
  if (const Value* f = e->get("frames"); f != nullptr && f->kind != Value::Kind::kNone) {
    if (!f->isSeq()) return c.bad(where + ".frames", "a list of frames", f);
    out->hasFrames = true;
    for (const Value* fr : f->items) {
      if (fr->kind != Value::Kind::kDict) return c.bad(where + ".frames", "frame dicts", fr);
      Frame frame;
      if (const Value* n = fr->get("name"); n != nullptr && n->isStr()) frame.name = n->s;
      if (const Value* n = fr->get("filename"); n != nullptr && n->isStr()) frame.filename = n->s;
      if (const Value* n = fr->get("line"); n != nullptr) asInt(n, &frame.line);
      out->frames.push_back(std::move(frame));
    }
  }
  return true;
}

// "[0, 1, 2]" (torch's ranks_str), or a list of ints; "all" and "" leave the ranks unknown.
bool parseRanks(const Value* v, std::vector<int>* out, std::string* text) {
  if (v == nullptr) return true;
  if (v->isSeq()) {
    for (const Value* r : v->items) {
      int64_t x;
      if (!asInt(r, &x) || x < 0 || x > (1 << 24)) return false;
      out->push_back(static_cast<int>(x));
    }
    return true;
  }
  if (!v->isStr()) return false;
  *text = v->s;
  std::string digits;
  for (char ch : v->s + ",") {
    if (ch >= '0' && ch <= '9') {
      digits += ch;
      if (digits.size() > 8) return false;
    } else if (ch == ',' || ch == ']' || ch == ' ') {
      if (!digits.empty()) out->push_back(std::stoi(digits));
      digits.clear();
    } else if (ch != '[') {
      out->clear();  // "all" or another description: the ranks are not listed
      return true;
    }
  }
  return true;
}

}  // namespace

Status readPickle(const uint8_t* data, size_t size, const std::string& name, Pickle* out, const Limits& limits) {
  out->arena.clear();
  out->root = nullptr;
  PickleReader reader(data, size, name, limits, out);
  std::string error;
  return reader.run(&error) ? Status::ok() : Status::corrupt(error);
}

Status readJson(const std::string& text, const std::string& name, Pickle* out, const Limits& limits) {
  out->arena.clear();
  out->root = nullptr;
  JsonBuilder builder(limits, out);
  builder.setTotal(text.size());
  if (!nlohmann::json::sax_parse(text, &builder) || out->root == nullptr) {
    return Status::corrupt(
        name + ": " +
        (builder.errorAt() == std::string::npos ? "" : "offset " + std::to_string(builder.errorAt()) + ": ") +
        (builder.error().empty() ? std::string("no JSON value") : builder.error()));
  }
  return Status::ok();
}

int rankFromFileName(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  for (const char* ext : {".json", ".pkl", ".pickle"}) {
    const size_t n = std::strlen(ext);
    if (base.size() > n && base.compare(base.size() - n, n, ext) == 0) base.resize(base.size() - n);
  }
  size_t k = base.size();
  while (k > 0 && base[k - 1] >= '0' && base[k - 1] <= '9') --k;
  if (k == base.size() || base.size() - k > 7) return -1;
  return std::stoi(base.substr(k));
}

Status parseDump(const std::string& bytes, const std::string& file, int rank, Dump* out) {
  *out = Dump{};
  out->file = file;
  Pickle doc;
  size_t first = 0;
  while (first < bytes.size() && std::isspace(static_cast<unsigned char>(bytes[first]))) ++first;
  if (first < bytes.size() && bytes[first] == '{') {
    out->format = "json";
    RL_CHECK(readJson(bytes, file, &doc));
  } else {
    out->format = "pickle";
    RL_CHECK(readPickle(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), file, &doc));
  }
  std::string error;  // what Ctx::bad and parseEntry say
  Ctx c{file, &error};
  const Value* root = doc.root;
  if (root == nullptr || root->kind != Value::Kind::kDict) return c.corrupt("the dump", "a dict", root);
  const Value* version = root->get("version");
  if (version == nullptr || !(version->isStr() || version->isNumber())) {
    return c.corrupt("version", "a version string such as \"2.10\"", version);
  }
  if (version->isStr()) {
    out->version = version->s;
  } else {
    std::ostringstream s;
    s << version->number();
    out->version = s.str();
  }
  {
    const size_t dot = out->version.find('.');
    char* end = nullptr;
    const long major = std::strtol(out->version.c_str(), &end, 10);
    const long minor = dot == std::string::npos ? 0 : std::strtol(out->version.c_str() + dot + 1, nullptr, 10);
    if (end == out->version.c_str() || major != kSupportedMajor) {
      return Status::unsupported(file + ": version '" + out->version.substr(0, 20) +
                                 "': this reader knows Flight Recorder dumps of version 2.x (torch 2.3 to 2.11 write "
                                 "them); a newer RankLens may read this one");
    }
    out->versionMajor = static_cast<int>(major);
    out->versionMinor = static_cast<int>(minor);
  }
  if (const Value* v = root->get("comm_lib_version"); v != nullptr && v->isStr()) out->commLibVersion = v->s;
  if (const Value* pgc = root->get("pg_config"); pgc != nullptr) {
    if (pgc->kind != Value::Kind::kDict) return c.corrupt("pg_config", "a dict", pgc);
    for (const auto& [k, v] : pgc->entries) {
      if (!k->isStr() || v->kind != Value::Kind::kDict) return c.corrupt("pg_config", "name -> {name, desc, ranks}", v);
      ProcessGroup pg;
      pg.name = k->s;
      if (const Value* n = v->get("name"); n != nullptr && n->isStr()) pg.name = n->s;
      if (const Value* d = v->get("desc"); d != nullptr && d->isStr()) pg.desc = d->s;
      if (!parseRanks(v->get("ranks"), &pg.ranks, &pg.ranksText)) {
        return c.corrupt("pg_config['" + k->s.substr(0, 40) + "'].ranks", "a list of ranks", v->get("ranks"));
      }
      out->pgConfig[k->s] = std::move(pg);
    }
  }
  if (const Value* pgs = root->get("pg_status"); pgs != nullptr && pgs->kind == Value::Kind::kDict) {
    for (const auto& [k, v] : pgs->entries) {
      if (!k->isStr() || v->kind != Value::Kind::kDict) continue;
      PgStatus s;
      asInt(v->get("last_enqueued_collective"), &s.lastEnqueued);
      asInt(v->get("last_started_collective"), &s.lastStarted);
      asInt(v->get("last_completed_collective"), &s.lastCompleted);
      out->pgStatus[k->s] = s;
    }
  }
  if (const Value* entries = root->get("entries"); entries != nullptr) {
    if (!entries->isSeq()) return c.corrupt("entries", "a list", entries);
    out->hasEntries = true;
    out->entries.reserve(entries->items.size());
    for (size_t k = 0; k < entries->items.size(); ++k) {
      Entry e;
      if (!parseEntry(c, entries->items[k], k, &e)) return Status::corrupt(error);
      out->entries.push_back(std::move(e));
    }
  }
  out->rank = rank >= 0 ? rank : rankFromFileName(file);
  if (out->rank < 0) {
    return Status::invalidArgument(file +
                                   ": the dump does not say its rank and the file name does not end in it (torch "
                                   "names dumps <prefix><rank>); give the rank (--rank R) or rename the file");
  }
  return Status::ok();
}

Status loadDump(const std::string& path, int rank, Dump* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::systemError(path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || size > (std::streamoff(2) << 30))
    return Status::invalidArgument(path + ": larger than 2 GiB (not a Flight Recorder dump)");
  in.seekg(0);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!in.read(bytes.data(), size)) return Status::systemError(path + ": read failed");
  return parseDump(bytes, path, rank, out);
}

}  // namespace fr
}  // namespace ranklens
