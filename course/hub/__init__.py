"""`kvcourse hub`: a whole class on this machine, on JupyterHub (quizzes/INSTRUCTORS.md).

cli.py registers the command; launch.py starts and stops the hub; config.py is JupyterHub's
configuration; users.py reads the class list and the passwords; singleuser.py starts each
user's server.
"""
