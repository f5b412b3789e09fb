#!/usr/bin/env bash
# nbgrader's exchange for the course on this server, run as root: make-exchange.sh GRADER
#
# /srv/nbgrader/exchange (nbgrader_config.py's Exchange.root) is writable by every account, with the sticky
# bit, so no one removes or renames what another made there. The course's own folder in it is made now, by
# the grader account, with nbgrader's modes (rwxr-xr-x): made later by whoever came first, it could be a
# student's, who would then read every submission. nbgrader makes the rest inside it as the grader: outbound/
# (released assignments, read-only for students), inbound/ (submissions: students write, never list) and
# feedback/. Safe to run again.
set -euo pipefail

GRADER=${1:?usage: make-exchange.sh GRADER (the Unix account the formgrader runs as)}
ROOT=/srv/nbgrader/exchange
COURSE_ID=attention-by-hand  # nbgrader_config.py's CourseDirectory.course_id

if [ -e "$ROOT/$COURSE_ID" ] && [ "$(stat -c %U "$ROOT/$COURSE_ID")" != "$GRADER" ]; then
    echo "make-exchange.sh: $ROOT/$COURSE_ID belongs to $(stat -c %U "$ROOT/$COURSE_ID"), not $GRADER:" \
         "remove it (and read what is in it) and run this again" >&2
    exit 1
fi
install -d -m 755 /srv/nbgrader
install -d -m 1777 "$ROOT"
install -d -m 755 -o "$GRADER" -g "$(id -gn "$GRADER")" "$ROOT/$COURSE_ID"
