"""This repository's compatibility matrix, as nox sessions (written by `ftmatrix init`).

`nox -s plan` shows the cells of matrix.yaml, `nox -s matrix` runs them (one session
per cell) and builds reports/index.html, `nox -s report` rebuilds the report.
"""

from __future__ import annotations

import nox

from ftmatrix.sessions import *  # noqa: F403 -- importing them is what registers the sessions

nox.needs_version = ">=2026.10.20"
