"""Which `if` branches of a script a reader can tell are not taken, without running anything.

    if [ "${CUSTOM_REWARD_FN}" = "True" ]; then reward_fn_file_path="$(pwd)/my_reward.py"; fi

The dry-run reader (`codemods.dry_run_report`) applies a script's assignments in order; one inside
a branch whose condition is known to be false (every word of the test expands from known values)
is skipped, as bash skips it. A condition that needs more (a command, a variable the user sets,
a test operator other than `=`, `==`, `!=`, `-z`, `-n`) is taken as true: the reader then sees
the branch's assignments, as it did before it read conditions.
"""

from __future__ import annotations

from typing import Callable, Optional

# expand(node) -> the word's text, or None when only running the script would tell it.
Expand = Callable[[object], Optional[str]]

_COMPARISONS = {"=": str.__eq__, "==": str.__eq__, "!=": str.__ne__}
_GLOB = frozenset("*?[]|()")


def skipped_by_a_branch(node, expand: Expand) -> bool:
    """Whether `node` sits in an `if` branch that is known not to run."""
    child, parent = node, node.parent
    while parent is not None:
        if parent.type in ("if_statement", "elif_clause", "else_clause") and not _branch_may_run(parent, child, expand):
            return True
        child, parent = parent, parent.parent
    return False


def _branch_may_run(clause, child, expand: Expand) -> bool:
    """Whether the branch of `clause` (an if, elif or else) that holds `child` may run."""
    if child.type in ("elif_clause", "else_clause") or child == _condition(clause):
        return True  # judged at that clause, or a condition, which always runs
    statement = clause if clause.type == "if_statement" else clause.parent
    earlier = [
        statement,
        *(c for c in statement.named_children if c.type == "elif_clause" and c.start_byte < clause.start_byte),
    ]
    if clause.type != "if_statement" and any(_truth(_condition(c), expand) is True for c in earlier):
        return False  # an earlier condition holds: bash runs that branch instead
    own = _condition(clause) if clause.type != "else_clause" else None
    return own is None or _truth(own, expand) is not False


def _condition(clause):
    if clause.type == "else_clause":
        return None
    return clause.child_by_field_name("condition") or next(
        (c for c in clause.named_children if c.type in ("test_command", "list", "command", "pipeline")), None
    )


def _truth(node, expand: Expand) -> Optional[bool]:
    """The condition's value, or None when it cannot be told without running the script."""
    if node is None:
        return None
    if node.type == "list" and len(node.children) == 3:
        left, operator, right = node.children
        a, b = _truth(left, expand), _truth(right, expand)
        if operator.type == "&&":
            return False if False in (a, b) else (True if a is b is True else None)
        if operator.type == "||":
            return True if True in (a, b) else (False if a is b is False else None)
        return None
    if node.type == "test_command" and len(node.named_children) == 1:
        return _test(node.named_children[0], expand)
    return None


def _test(expression, expand: Expand) -> Optional[bool]:
    if expression.type == "binary_expression" and len(expression.children) == 3:
        left, operator, right = expression.children
        compare = _COMPARISONS.get(operator.type)
        a, b = _word(left, expand), _word(right, expand)
        return None if compare is None or a is None or b is None else compare(a, b)
    if expression.type == "unary_expression" and len(expression.named_children) == 2:
        operator, operand = expression.named_children
        value = _word(operand, expand)
        name = operator.text.decode() if operator.text else ""
        if value is None or name not in ("-z", "-n"):
            return None
        return (value == "") == (name == "-z")
    return None


def _word(node, expand: Expand) -> Optional[str]:
    if node.type == "extglob_pattern":  # `[[ $A == word ]]`: a pattern, literal when it has no glob characters
        text = node.text.decode() if node.text else ""
        return None if _GLOB & set(text) else text
    return expand(node)
