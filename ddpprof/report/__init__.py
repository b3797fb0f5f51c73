"""Tables and reports: everything that turns results into text for people or machines."""
