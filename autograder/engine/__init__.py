"""The grading engine: everything that decides a verdict, and nothing else.

``assignments`` lists the exercises; each ``checks/<exercise>.py`` declares one (cases, known mistakes,
points) with the seeded inputs of ``inputs/``; ``judging.grade`` runs the student's code in the sandbox
(``sandbox/``) through a call protocol (``protocols``), compares with the reference from ``solutions/``
(``compare``, ``tolerances``) and names the mistake. ``ipynb`` reads notebooks safely, ``student_code``
keeps their definitions, ``limits`` holds the caps. Nothing here imports the instructor tools or the
pytest plugin: the class store's key is a hash of this package, ``solutions/`` and the ``course`` modules
it uses.
"""
