#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""docs/config.md's tables of settings are the ones `ranklens dump-config --markdown` prints from config/'s table:
fails, with the difference and the fix, when a setting was added, removed or changed on one side only.
    check_config_docs.py RANKLENS DOCS_CONFIG_MD"""
import difflib
import subprocess
import sys

BEGIN = "<!-- settings table: begin (ranklens dump-config --markdown) -->"
END = "<!-- settings table: end -->"


def main() -> int:
    ranklens, docs = sys.argv[1], sys.argv[2]
    printed = subprocess.run([ranklens, "dump-config", "--markdown"], capture_output=True, text=True, check=True).stdout
    text = open(docs, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        print(f"{docs}: the markers around the settings table are missing ({BEGIN} ... {END})")
        return 1
    documented = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n") + "\n"
    if documented == printed:
        print(f"{docs}: the settings table matches ranklens dump-config --markdown ({sum(line.startswith('| `') for line in printed.splitlines())} keys)")
        return 0
    sys.stdout.writelines(difflib.unified_diff(documented.splitlines(True), printed.splitlines(True),
                                               "docs/config.md", "ranklens dump-config --markdown"))
    print(f"\n{docs} and the settings table differ: run `ranklens dump-config --markdown` and paste its output "
          f"between the markers")
    return 1


if __name__ == "__main__":
    sys.exit(main())
