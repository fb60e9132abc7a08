"""The cases' conftest: part of what every case runs, so part of the reuse key."""
