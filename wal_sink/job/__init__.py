"""The streaming job's supervisor, without Spark: the restart loop and its
strategies, the way each attempt applies what its query stages (a committer thread,
or a follower process), and the follower child. It drives the Spark side (spark/)
through a small interface and never imports pyspark."""
