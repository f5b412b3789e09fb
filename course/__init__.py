"""Runtime helpers imported by the course notebooks: toy data (``course.toy``) and plots
(``course.plotting``). Submodules are imported on demand so that graders, which need only the
toy data, do not pay for matplotlib."""
