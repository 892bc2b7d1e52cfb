"""Who may start costly work, and when: fair queues, upload slots, disk room, login throttles."""
