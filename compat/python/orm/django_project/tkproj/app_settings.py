"""Settings of the running application (app.py): the version of the code
deployed before the migrations, whose models (libraryclient) know the
schema of library's first migration only."""

from tkproj.settings import *  # noqa: F401,F403

INSTALLED_APPS = ["libraryclient"]
