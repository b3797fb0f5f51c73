"""The command line's grammar: parameter types, options and option groups."""
