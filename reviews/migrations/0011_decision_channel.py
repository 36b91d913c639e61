"""Decisions record their channel (browser, API with the token, email link, system).

Rows logged before this say `unknown`: the column is added with that constant default, which
PostgreSQL stores in the catalogue without touching the rows, so the append-only trigger (which
refuses UPDATE) is not in the way and nothing is backfilled. Whether an old decision came from a
browser or the API cannot be known after the fact, so it is not guessed.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('reviews', '0010_notice_link_is_a_path'),
    ]

    operations = [
        migrations.AddField(
            model_name='decision',
            name='api_token',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='reviews.apitoken'),
        ),
        migrations.AddField(
            model_name='decision',
            name='channel',
            field=models.CharField(choices=[('browser', 'Browser'), ('api', 'API'), ('email_link', 'Email link'), ('system', 'System'), ('unknown', 'Unknown')], default='unknown', max_length=12),
        ),
    ]
