"""A status as the page shows it: a chip with its name, coloured by one CSS rule per status."""

from __future__ import annotations

from html import escape

from ftmatrix.cell.status import Status
from ftmatrix.report.grid import status_css_name

STATUS_COLOURS = {
    # Colour-blind-safe pairs (Okabe-Ito based); the status text is always shown too.
    Status.PASS: ("#1a7f37", "#ffffff"),
    Status.FAIL: ("#b3261e", "#ffffff"),
    Status.CRASH: ("#6d1b7b", "#ffffff"),
    Status.TIMEOUT: ("#d55e00", "#ffffff"),
    Status.OOM: ("#e69f00", "#000000"),
    Status.SKIP: ("#d0d7de", "#000000"),
    Status.NOT_APPLICABLE: ("#eaeef2", "#57606a"),
    Status.UNINSTALLABLE: ("#56b4e9", "#000000"),
    Status.INSTALL_ERROR: ("#0072b2", "#ffffff"),
    Status.ERROR: ("#000000", "#f0e442"),
}


def status_chip(status: Status) -> str:
    # Colours come from one rule per status (see status_css): a 500-cell grid repeats
    # this span thousands of times.
    return f'<span class="status s-{status_css_name(status)}">{escape(status.value)}</span>'


def status_css() -> str:
    """The page's rule for each status's colours."""
    return "".join(
        f".s-{status_css_name(status)}{{background:{background};color:{colour}}}"
        for status, (background, colour) in STATUS_COLOURS.items()
    )
