"""The practice round: mock rounds drawn from the bug catalog, their grader, hints, from-scratch exercises and the discussion drill."""
