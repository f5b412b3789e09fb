# /etc/profile.d/attention-course.sh, written by deploy/jupyterhub/login-path.sh. JupyterLab's terminals are
# login shells, where /etc/profile sets PATH anew: this puts the course's commands (course-weights, course-work,
# nbgrader; for the grader account course-release and the graders) back on it.
attention_course_env=@STUDENT_ENV@
if [ "$(id -un)" = "@GRADER@" ]; then
    attention_course_env=@GRADER_ENV@
fi
case ":$PATH:" in
    *":$attention_course_env/bin:"*) ;;
    *) PATH="$attention_course_env/bin:$PATH"; export PATH ;;
esac
unset attention_course_env
