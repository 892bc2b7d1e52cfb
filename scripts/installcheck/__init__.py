"""scripts/install-check's parts: the guide read as commands (guide), a terminal to run them in
(terminal), the machines they run on (machines), the parts people play (people) and what each
command is checked for (steps)."""
