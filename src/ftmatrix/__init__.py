"""ftmatrix: a cross-version compatibility matrix for the LLM fine-tuning stack."""

__version__ = "0.1.0"
