"""``ftmatrix check``: does my stack work? A stack, a published results.json, verdicts."""
