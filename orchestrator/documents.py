"""A YAML file the user hands over (a sweep spec, a decode config, an export) read into data,
bounded before anything is built: the file's size, and the nodes its YAML aliases stand for,
counted on the composed graph without expanding them (600 bytes of nested anchors can stand
for 10⁹ nodes). Errors are one line naming the field the file is read as."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.errors import count_text, shorten


class DocumentError(ValueError):
    """A file that cannot be read as a bounded YAML document; the message names its field."""


# real specs stay far below (the shipped ones: at most 2 KB and 117 YAML nodes)
MAX_BYTES = 256 << 10  # the file
MAX_NODES = 100_000  # YAML nodes once its aliases (*name) are expanded


def _expanded_size(root: yaml.Node, field: str) -> dict[int, int]:
    """id(node) -> the nodes it stands for once every alias under it is expanded, computed
    on the composed graph, where an alias is the node it names: the cost is the size of the
    file, not of the expansion. A node inside itself (`&a [*a]`) raises DocumentError."""

    def parts(node: yaml.Node) -> list[yaml.Node]:
        return [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value

    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(n)] for n in parts(node))
        elif key in size:
            continue
        elif isinstance(node, yaml.ScalarNode):
            size[key] = 1
        elif key in open_nodes:
            line = node.start_mark.line + 1
            raise DocumentError(f"{field}: line {line}: an alias inside the node it names")
        else:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((n, False) for n in parts(node) if id(n) not in size)
    return size


def _check_aliases(root: yaml.Node, field: str) -> None:
    """Refuse a document that expands past MAX_NODES nodes through its aliases (nested
    anchors grow it ×9 a line: 600 bytes can stand for 10⁹ nodes), naming the deepest key
    that does."""
    size = _expanded_size(root, field)
    if size[id(root)] <= MAX_NODES:
        return
    path, node = [], root
    while isinstance(node, yaml.MappingNode):
        key, value = max(node.value, key=lambda kv: size[id(kv[1])])
        if size[id(value)] <= MAX_NODES or not isinstance(key, yaml.ScalarNode):
            break
        path.append(str(key.value))
        node = value
    where = ".".join(path) or "the document"
    raise DocumentError(f"{field}: {shorten(where, 80)}: {count_text(size[id(node)])} YAML nodes with its "
                        f"aliases (*name) expanded; at most {MAX_NODES:,}")


def read_yaml(text: str, field: str = "spec"):
    """The data of a YAML document (safe tags only), refused by `_check_aliases` before any
    alias is expanded; errors name `field`."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml's parser: 10x faster
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node, field)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_document(path: str | Path, field: str = "spec"):
    """The data of the YAML file at `path`, within MAX_BYTES and MAX_NODES; DocumentError
    naming `field` (spec, config) otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{field}: no such file {path}")
    if path.stat().st_size > MAX_BYTES:
        raise DocumentError(f"{field}: {path} is {path.stat().st_size:,} bytes; a {field} is at most "
                            f"{MAX_BYTES:,}")
    try:
        return read_yaml(path.read_text(), field)
    except UnicodeDecodeError as err:
        raise DocumentError(f"{field}: {path} is not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f", line {mark.line + 1}" if mark is not None else ""
        raise DocumentError(f"{field}: {path} is not valid YAML ({str(err).splitlines()[0]}{at})") from None
