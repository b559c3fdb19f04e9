# SPDX-License-Identifier: Apache-2.0
"""docker/Dockerfile has never been built (no Docker engine on the development machines): at least its packages must
be the ones scripts/setup.sh installs to build RankLens, so that the image builds what CI builds."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# setup.sh's packages the image does not need: the fuzzing compiler, the formatter, the debugger, pip (no Python tests
# in the image).
NOT_IN_IMAGE = {"clang", "clang-format", "libclang-rt-14-dev", "gdb", "python3-pip"}


def setup_packages():
    text = open(os.path.join(ROOT, "scripts", "setup.sh")).read()
    match = re.search(r"^packages=\((.*?)\)", text, re.S | re.M)
    assert match, "scripts/setup.sh has no packages=(...) list"
    return set(match.group(1).split())


def dockerfile_packages():
    text = open(os.path.join(ROOT, "docker", "Dockerfile")).read().replace("\\\n", " ")
    packages = set()
    for line in re.findall(r"apt-get install ([^&\n]*)", text):
        packages.update(w for w in line.split() if not w.startswith("-") and not w.startswith('"'))
    return packages


def test_the_image_installs_what_setup_installs_to_build():
    missing = setup_packages() - NOT_IN_IMAGE - dockerfile_packages()
    assert not missing, f"docker/Dockerfile does not install {sorted(missing)} (scripts/setup.sh does)"
