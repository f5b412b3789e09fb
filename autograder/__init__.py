"""Graders for the course: pytest tests, and the checks they share with nbgrader's hidden-test cells."""
