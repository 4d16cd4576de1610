"""Installs the tests' full disk (`tests/full_disk.py`) at interpreter startup where the environment asks for it."""

import os

if os.environ.get("SUITE_TEST_FULL_DISK"):
    from tests.full_disk import install_from_environment

    install_from_environment()
