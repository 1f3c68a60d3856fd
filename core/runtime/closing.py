"""``with`` and ``async with`` for an object that has ``close`` and ``aclose``."""

from __future__ import annotations

from typing import Self

__all__ = ["Closable"]


class Closable:
    """``with obj:`` closes it with ``close()``, ``async with obj:`` with ``aclose()``."""

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
