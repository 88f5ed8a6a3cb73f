"""Settings of the project of TestDjangoMigrations (internal/compat): one
app, library, whose migrations run with `manage.py migrate`. The database
is the server the PG* environment variables name (psycopg 3)."""

import os

SECRET_KEY = "tashkent-compat-not-secret"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["library"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        "USER": os.environ.get("PGUSER", "postgres"),
        "PASSWORD": os.environ.get("PGPASSWORD", ""),
        "NAME": os.environ.get("PGDATABASE", "postgres"),
    }
}
