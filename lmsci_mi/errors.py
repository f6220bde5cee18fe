"""The library's own exceptions, so that bad input and bugs never look alike.

:class:`UserInputError` is input the caller can fix (a bad argument, an unknown site, an empty
prompt set, a config value out of range); :class:`UnknownNameError` is a name that no registry or
table holds, with the closest names. The CLI prints these in one line and exits 2; anything else
is a bug and keeps its traceback. Imports nothing of the package (a core module).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["UnknownNameError", "UserInputError"]


class UserInputError(ValueError):
    """Input the caller can fix: the message names what is wrong and how to fix it.

    A ValueError, so ``except ValueError`` keeps catching it.

    >>> raise UserInputError("--top must be at least 1, not 0")
    Traceback (most recent call last):
    lmsci_mi.errors.UserInputError: --top must be at least 1, not 0
    """


class UnknownNameError(KeyError, UserInputError):
    """A name that no registry or table holds; the message lists the names that are there and
    the closest ones.

    A KeyError for the registries and tables that are looked up like a mapping, and a
    :class:`UserInputError` (so a ValueError too) for the lookups that checked names with one;
    every existing ``except KeyError`` and ``except ValueError`` keeps catching it. Unlike a plain
    KeyError it prints its message as written, not quoted.

    Attributes:
        name: the name asked for (None when the message was written by hand).
        known: the names there are (empty when too many to list).

    >>> error = UnknownNameError.among("probe kind", "logistc", ["logistic", "ridge"])
    >>> print(error)
    unknown probe kind 'logistc' (did you mean 'logistic'?); known: ['logistic', 'ridge']
    >>> isinstance(error, KeyError) and isinstance(error, ValueError)
    True
    """

    def __init__(
        self, message: str, *, name: object = None, known: Iterable[str] = ()
    ) -> None:
        super().__init__(message)
        self.name = name
        self.known = tuple(known)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    @classmethod
    def among(
        cls, what: str, name: object, known: Iterable[str], *, listed: str = "known"
    ) -> UnknownNameError:
        """The error for ``name`` missing among ``known``: the closest names (difflib), then all.

        Args:
            what: what the name names ("editing method", "site").
            name: the name asked for.
            known: the names there are.
            listed: the word before the full list ("known", "registered").
        """
        names = sorted(known)
        close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        return cls(f"unknown {what} {name!r}{hint}; {listed}: {names}", name=name, known=names)
