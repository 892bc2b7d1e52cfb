"""The journalists' daily digest: its schedule, its encrypted mail, and the SMTP client that sends it."""
