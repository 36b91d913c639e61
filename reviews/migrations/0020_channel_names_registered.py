"""A decision and a delivery name their channel by the registered channel's name
(`reviews.channels`), not one of fixed choices, so a channel registered elsewhere records its own:
the choices go, and the columns widen to 20 characters.

Widening a varchar is a change of the catalogue in PostgreSQL: no row is rewritten or updated, so
the decision log's append-only trigger (which refuses UPDATE) is not in the way.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('reviews', '0019_inbox_changes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='decision',
            name='channel',
            field=models.CharField(default='unknown', max_length=20),
        ),
        migrations.AlterField(
            model_name='delivery',
            name='channel',
            field=models.CharField(max_length=20),
        ),
    ]
