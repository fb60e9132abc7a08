"""known_issues.yaml: failures explained by the owning project's report, matched by shape.

An entry names the package whose code is at fault (``package``), that project's own
report (``upstream``: an issue or pull request in the package's repository, per
:mod:`ftmatrix.repositories`), the change that fixed it (``fix``) and where else it was
discussed (``seen-in``). It explains a failed record only where its whole signature fits:

- the exception and message patterns (the message names the quantity a contract
  compared) and the frame where it broke (the root cause's innermost framework frame);
- the installed packages (``match.packages``, by default the ``affected`` ranges);
- the case functions it is about (``match.cases``, globs);
- which contracts fail and which hold (``match.contracts``), read from the record's
  ``<name>_contract`` metrics or its message's ``contracts broken:`` line, where the case
  names its contracts;
- which parametrisations of the case fail together in the same cell and which pass
  (``match.parametrizations``: ``{accumulation-1: pass, accumulation-2: fail}``).

A failure that fits no entry stays unexplained; one that fits several is shown under
each. ``affected`` and ``fixed-in`` are claims until ``ftmatrix known-issues prove``
runs the cells at their boundaries (:mod:`ftmatrix.proofs`).

Import from here: an entry and the failures it explains are :mod:`.entry`, the file read
and validated with every problem's key path is :mod:`.parsing`.
"""

from ftmatrix.known_issues.entry import (
    KnownIssue,
    Proof,
    case_parts,
    cell_statuses,
    contract_verdicts,
    explain,
    explain_all,
)
from ftmatrix.known_issues.parsing import (
    ENTRY_KEYS,
    MATCH_KEYS,
    PROOF_KEYS,
    load_known_issues,
    parse_known_issues,
)

__all__ = [
    "ENTRY_KEYS",
    "MATCH_KEYS",
    "PROOF_KEYS",
    "KnownIssue",
    "Proof",
    "case_parts",
    "cell_statuses",
    "contract_verdicts",
    "explain",
    "explain_all",
    "load_known_issues",
    "parse_known_issues",
]
