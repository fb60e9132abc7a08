"""The noxfile ``ftmatrix run`` uses in a folder whose own noxfile does not import the sessions.

nox runs it from this package's folder; ``ftmatrix run`` names the matrix, the cases,
the reports folder and the venvs' folder absolutely, so everything stays in the user's.
"""

from __future__ import annotations

import nox

from ftmatrix.sessions import *  # noqa: F403 -- importing them is what registers the sessions

nox.needs_version = ">=2026.10.20"
