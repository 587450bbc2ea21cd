"""`NAME=VALUE` items of a repeatable flag (`--env`, `--image`, `--train-arg`) as one dict."""

from bench.errors import ConfigError


def parse_pairs(items: list[str] | None, flag: str, example: str, *, form: str = "NAME=VALUE",
                value_required: bool = False) -> dict[str, str]:
    """Each `NAME=VALUE` split at its first '='; an item without a name (or a value, if required) is a
    ConfigError naming the flag, the item and an example. The last of two items with one name wins."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or (value_required and not value):
            raise ConfigError(f"{flag} {item!r} is not {form} (e.g. {flag} {example})")
        out[name] = value
    return out
