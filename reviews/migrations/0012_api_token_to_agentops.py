"""API tokens are the project's now (`agentops.0017_api_token_from_reviews` renamed their table
and took over their content type): drop the model from this app's state and point
`Decision.api_token` at `agentops.ApiToken`. Nothing changes in the database: the decision log
keeps the token's id without a constraint, as before.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0017_api_token_from_reviews"),
        ("reviews", "0011_decision_channel"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="decision",
                    name="api_token",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="agentops.apitoken",
                    ),
                ),
                migrations.DeleteModel(name="ApiToken"),
            ],
            database_operations=[],
        ),
    ]
