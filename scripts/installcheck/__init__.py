"""scripts/install-check's parts: the guide read as commands (guide), a terminal to run them in
(terminal), the machines they run on (machines), the repositories they install from
(repository), the parts people play (people), what each command is checked for (steps), what
stands in for what this machine lacks (standins), and the new server of the restore (newserver)."""
