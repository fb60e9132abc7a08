"""The product's cases folder, reused: its helpers on the path and its fixtures here.

These cases run the product's case logic against deliberately wrong trainers, to
prove each numeric contract can fail (tests/test_contracts.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

CASES = Path(__file__).resolve().parents[3] / "cases"
sys.path.insert(0, str(CASES))

_spec = importlib.util.spec_from_file_location("product_cases_conftest", CASES / "conftest.py")
assert _spec is not None and _spec.loader is not None
_product = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_product)

long_lived_objects_frozen = _product.long_lived_objects_frozen
tokenizer = _product.tokenizer
family = _product.family
model_dirs = _product.model_dirs
tiny_model_dir = _product.tiny_model_dir
tiny_model = _product.tiny_model
