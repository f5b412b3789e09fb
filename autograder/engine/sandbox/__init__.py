"""The walled sandbox in which student code runs: a fork server that knows no answers (``zygote``), the
walls each run gets (``walls``), what runs inside them (``harness``) and the grader's side (``client``)."""
