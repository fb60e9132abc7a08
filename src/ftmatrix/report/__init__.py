"""The report: the grid of records, its failures and changes, rendered as one HTML page."""
