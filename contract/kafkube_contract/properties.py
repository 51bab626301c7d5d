"""java.util.Properties text, the syntax of ``server.properties`` and ``meta.properties``:
read for the broker's static configuration and its log dirs' identity, written by the
operator for the brokers it runs."""

from __future__ import annotations

from collections.abc import Mapping

from kafkube_contract.config_keys import ConfigError


def parse_properties(text: str) -> dict[str, str]:
    """Parse java.util.Properties text: key=value or key: value, # and ! comments."""
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for raw_line in lines:
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\"):
            line = line[:-1] + next(lines, "").strip()
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            key, value = line, ""
        else:
            key, value = line[:sep].strip(), line[sep + 1 :].strip()
        props[key] = value
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """java.util.Properties text that parse_properties reads back as ``props``, keys sorted.
    Values must be single lines: a line break has no meaning in a Kafka config."""
    for key, value in props.items():
        if "\n" in value or "\r" in value or value.endswith("\\"):
            raise ConfigError(f"{key}: a value must be a single line (and not end in \\)")
    return "".join(f"{key}={props[key]}\n" for key in sorted(props))
