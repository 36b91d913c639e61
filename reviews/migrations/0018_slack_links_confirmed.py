"""Slack links made before a link was confirmed with Slack (`users.info`, the profile's email must
be the person's) were never checked: anyone could have sent their own link to an operator. They
are removed; each person links again from the account page, this time confirmed."""

from django.db import migrations


def unconfirmed_links_remove(apps, schema_editor):
    apps.get_model("reviews", "SlackIdentity").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("reviews", "0017_notice_second_approval")]

    operations = [migrations.RunPython(unconfirmed_links_remove, migrations.RunPython.noop)]
