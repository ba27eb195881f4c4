"""The former name of ``specpolicy.adapters.commands_doctor`` (the ``doctor`` command), for one release."""

from __future__ import annotations

from .commands_doctor import cmd_doctor, register

__all__ = ["cmd_doctor", "register"]
