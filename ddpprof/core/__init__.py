"""Infrastructure every layer uses: errors, units, limits, atomic writes, bounded input
reading, processes, progress."""
