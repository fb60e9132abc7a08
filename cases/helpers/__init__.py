"""What a case imports besides the frameworks it tests: ``from helpers.tiny import CORPUS``.

cases/ is on a case's path (pytest puts its conftest's folder there), so these are
``helpers.<name>``:

- ``tiny``: tiny models and tokenizers per family, built offline with random weights;
- ``compat``: each release's own API (``sft_arguments``, ``dpo_arguments``, ...), chosen
  by inspecting the installed release;
- ``train``: ``train_and_check``, what every training case asks of a trainer;
- ``contracts``: numeric contracts, a trainer's numbers against our own computation;
- ``update``: what one optimizer step must do to the weights;
- ``knobs``: the settings users turn, as pairwise-covered axes of a case;
- ``adapters``: adapters at users' settings, and every path a saved one comes back by;
- ``processes``: processes a case starts (ranks, a launcher, a server) and their reports.

Importing this package imports no framework: each module imports torch and the rest
where it needs them.
"""
