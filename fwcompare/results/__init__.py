"""What a run leaves: the result store, its tables and figures, the claim
language that judges them, and runs compared and archived. Stands on
``core``, ``frameworks`` and ``plan``; measures nothing."""
