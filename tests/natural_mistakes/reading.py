"""How the messages on one natural mistake read, mechanically: missed (every exercise it should fail passed),
named (a known mistake, or the broken helper it builds on), clue (facts about the output, or a PyTorch error
explained) or bare ("数值不对" and nothing more). Whether a name is the right one is judged by a reader
against the entry's cause (``judged.py``)."""

ORDER = ("missed", "bare", "clue", "named")


def read_verdict(verdict: dict) -> str:
    if verdict["passed"]:
        return "missed"
    if verdict["mistake"] or verdict["summary"].startswith("没有通过：用到的"):
        return "named"
    facts = ("线索：", "这是什么意思：", "第一个和参考不一样的步骤：", "参数和约定不一致", "应该返回两个值",
             "元素的 tuple，得到的是", "应该是 torch.Tensor，得到的是", "应该是 Python 的", "的 dtype 不对：期望")
    if any(fact in verdict["summary"] + verdict["details"] for fact in facts) or "还没有实现" in verdict["summary"] \
            or _course_worded_error(verdict["summary"]):
        return "clue"
    return "bare"


def _course_worded_error(summary: str) -> bool:
    """An error the course's own code raised with a message in Chinese (PyTorch's own are English)."""
    error = summary.removeprefix("运行出错：")
    return error != summary and any("\u4e00" <= ch <= "\u9fff" for ch in error)


def reading(row: dict) -> str:
    """The best reading among the verdicts on the exercises the entry should fail."""
    listed = [v for v in row["verdicts"] if v["exercise"] in row["exercises"]]
    return max((read_verdict(v) for v in listed), key=ORDER.index, default="missed")


def names(row: dict) -> dict[str, str]:
    """exercise -> the known mistake or broken helper its verdict names (only those that name one)."""
    found = {}
    for v in row["verdicts"]:
        if v["passed"]:
            continue
        if v["mistake"]:
            found[v["exercise"]] = v["mistake"]
        elif v["summary"].startswith("没有通过：用到的"):
            found[v["exercise"]] = v["summary"].removeprefix("没有通过：")
    return found
