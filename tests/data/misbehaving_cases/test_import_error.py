"""A case file that cannot even be imported: our bug, recorded as error."""

import a_module_that_does_not_exist  # noqa: F401


def test_never_collected():
    pass
