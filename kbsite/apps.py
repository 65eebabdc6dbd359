from django.apps import AppConfig


class KbsiteConfig(AppConfig):
    name = "kbsite"
    verbose_name = "Site"
