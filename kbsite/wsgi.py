"""WSGI entry point, served by ``kbsite.webserver`` (``manage.py serve``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbsite.settings")

application = get_wsgi_application()
