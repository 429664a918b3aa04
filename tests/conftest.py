"""Test set-up: the repo root on sys.path (tests never depend on the working directory) and
small envs shared by component and integration tests."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
