"""Back to RLDS: export Reverb tables, and record TF-Agents collection, as TFDS datasets.

* `reverb_export.export_table`: the items of a Reverb table (a live server, or a
  checkpoint) rebuilt into RLDS episodes, each item read exactly once in insertion order.
* `recorder.RldsRecorder`: a TF-Agents observer that writes what a driver collects as RLDS
  episodes (as envlogger does for dm_env).
* `rlds_copy.save_as_rlds`: any source `rlds_reverb.load` reads, written as an RLDS TFDS
  dataset (`rlds-reverb convert`).
"""
