"""Cross-cutting suites: users' data, the TF-Agents contract, layout, security, temp
files, dead servers, notebooks, start-up."""
