"""Grade one exercise on cells given as JSON on stdin; print the verdict as JSON.

Input: ``{"exercise": name, "cells": [{"label": ..., "source": ...}, ...]}``. Used by
``autograder.notebook.grade`` so that grading runs in an interpreter the student's code never touched.
"""
import json
import sys

from autograder.assignments import EXERCISES
from autograder.exercise import grade
from autograder.notebook_source import Cell, student_code


def main() -> None:
    request = json.load(sys.stdin)
    code = student_code([Cell(c["label"], c["source"]) for c in request["cells"]])
    verdict = grade(EXERCISES[request["exercise"]], code)
    json.dump({"passed": verdict.passed, "points": verdict.points, "max_points": verdict.max_points,
               "message": verdict.message}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
