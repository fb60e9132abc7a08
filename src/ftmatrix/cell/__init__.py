"""The inside of a cell: the modules that run in each cell's venv.

The results plugin, its records, failure signatures, the hardware probe, the GPU lease and
process helpers. They import only the standard library, pytest and packaging (a cell's venv
holds the frameworks under test, not ftmatrix's own dependencies); tests/test_boundary.py
enforces it.
"""
