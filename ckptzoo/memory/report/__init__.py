"""What the user reads about a plan: the text table, the HTML report and its charts."""
