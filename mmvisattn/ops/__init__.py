"""Pure attention operators (no module state), each with the explicit reference its backends are
tested against (:mod:`.check` runs that test on a user's machine)."""
