"""Writing into Reverb: `push` and its writer engines, observers, resumable pushes, seeding."""
