"""Settings from command-line flags over prefixed environment variables, for every process.

The controller (``QC_*``) and the node agent (``QC_AGENT_*``) load theirs the
same way: a flag given wins over its variable; a variable with the prefix that
names no setting is a typo that would otherwise be ignored without a word; and
any bad value stops start-up with one line naming the setting and its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from queue_controller.errors import InputError

S = TypeVar("S", bound=BaseSettings)


def load_settings(model: type[S], *, prefix: str, flags: Mapping[str, object]) -> S:
    known = {f"{prefix}{name.upper()}" for name in model.model_fields}
    unknown = sorted(v for v in os.environ if v.startswith(prefix) and v not in known)
    if unknown:
        raise InputError(
            f"not a setting (known: {', '.join(sorted(known))})", where="settings", field=unknown[0]
        )
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return model(**given)  # type: ignore[arg-type]
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "settings"
        env = f" ({prefix}{field.upper()})" if field != "settings" else ""
        detail = first["msg"].removeprefix("Value error, ")
        raise InputError(detail, where="settings", field=f"{field}{env}") from None
