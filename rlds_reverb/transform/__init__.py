"""Episodes to what learners and tables hold: TF-Agents two-step trajectories (the drop-in
converter), Reverb item kinds, and the per-episode write plans built from them."""
