#!/usr/bin/env bash
# Put the course's commands on the PATH of login shells, as root:
#
#   login-path.sh STUDENT_ENV GRADER GRADER_ENV [TARGET]
#
# writes profile.sh, filled in, to TARGET (default /etc/profile.d/attention-course.sh): every account gets
# STUDENT_ENV/bin, the grader account GRADER_ENV/bin. Safe to run again.
set -euo pipefail
student_env=${1:?usage: login-path.sh STUDENT_ENV GRADER GRADER_ENV [TARGET]}
grader=${2:?usage: login-path.sh STUDENT_ENV GRADER GRADER_ENV [TARGET]}
grader_env=${3:?usage: login-path.sh STUDENT_ENV GRADER GRADER_ENV [TARGET]}
target=${4:-/etc/profile.d/attention-course.sh}
for value in "$student_env" "$grader" "$grader_env"; do
    case "$value" in *[!A-Za-z0-9._/@+-]*) echo "login-path.sh: $value: only letters, digits and ._/@+- please" >&2; exit 1 ;; esac
done
here=$(cd "$(dirname "$0")" && pwd)
install -d -m 755 "$(dirname "$target")"
sed -e "s|@STUDENT_ENV@|$student_env|" -e "s|@GRADER@|$grader|" -e "s|@GRADER_ENV@|$grader_env|" \
    "$here/profile.sh" > "$target.tmp"
chmod 644 "$target.tmp"
mv "$target.tmp" "$target"
