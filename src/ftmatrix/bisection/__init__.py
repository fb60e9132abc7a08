"""Bisection: find the first bad release of a package, over versions and over cells."""
