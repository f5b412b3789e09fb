"""nbgrader as the students' JupyterLab sees it (on JUPYTER_CONFIG_PATH, see ../jupyterhub_config.py): the
course and the exchange of the course's own nbgrader_config.py, which students cannot read."""
c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.course_id = "attention-by-hand"
c.Exchange.root = "/srv/nbgrader/exchange"
